//! Request bodies that grow by appending: the serialized messages of a conversation are kept
//! between calls, so turn N+1's body is turn N's bytes plus the new messages.
//!
//! Two things follow. Provider prompt caches (Anthropic `cache_control`, OpenAI's automatic
//! prefix caching, vLLM and llama.cpp prefix reuse) see the same prefix every turn, because
//! every body is laid out as `{…fixed fields…,"messages":[` + messages + `]}`: nothing that
//! changes per turn comes before the messages, and nothing comes after them. And a long run
//! stops paying for its whole history on every turn: only the messages that are new (and the
//! last group, which may still grow) are serialized, instead of a `serde_json::Value` tree of
//! the whole conversation.
//!
//! The cache is checked, not trusted: a request's messages are compared with the ones the
//! cached bytes were made from, and only the common prefix is reused. A message's bytes depend
//! on nothing but the message, so a resumed run (history read back from `messages.jsonl`)
//! produces the same bytes as the run that was not interrupted.

use std::sync::Mutex;

use super::ChatMessage;

/// How many conversations a provider keeps bytes for (a run and the `task` children it
/// serves at once).
const SLOTS: usize = 4;

/// Serialized message groups of the conversations a provider served lately.
#[derive(Debug, Default)]
pub struct WireCache {
    slots: Mutex<Vec<Slot>>,
}

#[derive(Debug, Default)]
struct Slot {
    /// The messages the cached groups were made from (a prefix of a conversation).
    source: Vec<ChatMessage>,
    /// `(end, bytes)`: each group's bytes and the index in `source` after its last message.
    groups: Vec<(usize, String)>,
    /// When it was last used (a counter).
    used: u64,
}

/// How a provider lays out messages.
pub trait WireFormat {
    /// Whether `next` joins the wire message of `prev` (Anthropic: consecutive tool results
    /// and user text are one `user` message).
    fn merges(&self, prev: &ChatMessage, next: &ChatMessage) -> bool;
    /// Appends the wire form of one group of messages to `out`; `last` is true for the last
    /// group of the request (Anthropic puts a cache breakpoint there).
    fn write_group(&self, group: &[ChatMessage], last: bool, out: &mut String);
}

impl Clone for WireCache {
    /// A copy starts empty: the cache is an optimization, never state.
    fn clone(&self) -> WireCache {
        WireCache::default()
    }
}

impl WireCache {
    /// Appends the wire form of `messages` (groups joined by `,`) to `out`, reusing the bytes
    /// of every group whose messages are unchanged since an earlier call.
    pub fn render(&self, format: &dyn WireFormat, messages: &[ChatMessage], out: &mut String) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let clock = slots.iter().map(|s| s.used).max().unwrap_or(0) + 1;
        let slot = pick(&mut slots, messages);
        slot.used = clock;
        let common = common_prefix(&slot.source, messages);
        // Groups reused: wholly inside the common prefix, and not joined by a message that
        // now follows them.
        let keep = slot
            .groups
            .iter()
            .take_while(|(end, _)| {
                *end <= common
                    && (*end == messages.len()
                        || *end == 0
                        || !format.merges(&messages[*end - 1], &messages[*end]))
            })
            .count();
        slot.groups.truncate(keep);
        let start = slot.groups.last().map_or(0, |(end, _)| *end);
        slot.source.truncate(start);
        // The rest, grouped; every group but the last is complete (what follows it does not
        // join it) and is cached.
        let mut bounds = Vec::new();
        let mut group_start = start;
        for i in start + 1..=messages.len() {
            if i == messages.len() || !format.merges(&messages[i - 1], &messages[i]) {
                bounds.push((group_start, i));
                group_start = i;
            }
        }
        let fresh_last = bounds.pop();
        for (from, to) in bounds {
            let mut bytes = String::new();
            format.write_group(&messages[from..to], false, &mut bytes);
            slot.groups.push((to, bytes));
            slot.source.extend_from_slice(&messages[from..to]);
        }
        let mut first = true;
        for (_, bytes) in &slot.groups {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(bytes);
        }
        if let Some((from, to)) = fresh_last {
            if !first {
                out.push(',');
            }
            format.write_group(&messages[from..to], true, out);
        }
    }
}

/// The slot for `messages`: the one holding the longest prefix of them, else a free or the
/// least recently used one, emptied.
fn pick<'s>(slots: &'s mut Vec<Slot>, messages: &[ChatMessage]) -> &'s mut Slot {
    // A conversation is recognized by its first two messages (system prompt and task), so
    // only candidates pay for a full comparison.
    let head = messages.len().min(2);
    let best = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            let n = head.min(s.source.len());
            n > 0 && s.source[..n] == messages[..n]
        })
        .map(|(i, s)| (common_prefix(&s.source, messages), i))
        .max()
        .map(|(_, i)| i);
    let index = match best {
        Some(i) => i,
        None if slots.len() < SLOTS => {
            slots.push(Slot::default());
            slots.len() - 1
        }
        None => {
            let lru = (0..slots.len()).min_by_key(|&i| slots[i].used).unwrap_or(0);
            slots[lru] = Slot::default();
            lru
        }
    };
    &mut slots[index]
}

fn common_prefix(a: &[ChatMessage], b: &[ChatMessage]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// `value` as JSON text appended to `out` (serde_json, so key order is the value's own).
pub fn push_json(out: &mut String, value: &impl serde::Serialize) {
    // Serializing plain data into a String cannot fail.
    out.push_str(&serde_json::to_string(value).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ChatRole;
    use std::cell::Cell;

    /// Joins consecutive tool messages; counts what it serializes.
    struct Counting {
        written: Cell<usize>,
    }

    impl WireFormat for Counting {
        fn merges(&self, prev: &ChatMessage, next: &ChatMessage) -> bool {
            prev.role == ChatRole::Tool && next.role == ChatRole::Tool
        }
        fn write_group(&self, group: &[ChatMessage], last: bool, out: &mut String) {
            self.written.set(self.written.get() + group.len());
            let texts: Vec<&str> = group.iter().map(|m| m.content.as_str()).collect();
            out.push_str(&format!(
                "[{}{}]",
                texts.join("+"),
                if last { "!" } else { "" }
            ));
        }
    }

    fn render(cache: &WireCache, f: &Counting, messages: &[ChatMessage]) -> String {
        let mut out = String::new();
        cache.render(f, messages, &mut out);
        out
    }

    #[test]
    fn only_new_messages_are_serialized_and_bytes_only_grow() {
        let f = Counting {
            written: Cell::new(0),
        };
        let cache = WireCache::default();
        let mut history = vec![ChatMessage::system("s"), ChatMessage::user("u")];
        assert_eq!(render(&cache, &f, &history), "[s],[u!]");
        history.push(ChatMessage::assistant("a", vec![]));
        history.push(ChatMessage::tool("1", "t1"));
        history.push(ChatMessage::tool("2", "t2"));
        f.written.set(0);
        assert_eq!(render(&cache, &f, &history), "[s],[u],[a],[t1+t2!]");
        assert_eq!(
            f.written.get(),
            1 + 1 + 2,
            "u and a once more, the tools once"
        );
        history.push(ChatMessage::assistant("b", vec![]));
        f.written.set(0);
        assert_eq!(render(&cache, &f, &history), "[s],[u],[a],[t1+t2],[b!]");
        assert_eq!(
            f.written.get(),
            3,
            "the tool group completed, then the new last one"
        );
        // A message changed in the middle: bytes from there on are made anew.
        history[2].content = "A".into();
        assert_eq!(render(&cache, &f, &history), "[s],[u],[A],[t1+t2],[b!]");
        // A fresh cache gives the same bytes (a resumed run).
        let fresh = WireCache::default();
        assert_eq!(render(&fresh, &f, &history), render(&cache, &f, &history));
        assert_eq!(render(&cache, &f, &[]), "");
    }

    #[test]
    fn a_cached_group_joined_by_a_new_message_is_remade() {
        let f = Counting {
            written: Cell::new(0),
        };
        let cache = WireCache::default();
        let mut a = vec![
            ChatMessage::system("s"),
            ChatMessage::user("u"),
            ChatMessage::tool("1", "t1"),
            ChatMessage::assistant("x", vec![]),
        ];
        assert_eq!(render(&cache, &f, &a), "[s],[u],[t1],[x!]");
        // Same prefix up to t1, then another tool message joins t1's group.
        a[3] = ChatMessage::tool("2", "t2");
        assert_eq!(render(&cache, &f, &a), "[s],[u],[t1+t2!]");
    }

    #[test]
    fn interleaved_conversations_keep_their_own_bytes() {
        let f = Counting {
            written: Cell::new(0),
        };
        let cache = WireCache::default();
        let parent = vec![
            ChatMessage::system("s"),
            ChatMessage::user("parent"),
            ChatMessage::assistant("p", vec![]),
        ];
        let child = vec![
            ChatMessage::system("s"),
            ChatMessage::user("child"),
            ChatMessage::assistant("c", vec![]),
        ];
        render(&cache, &f, &parent);
        render(&cache, &f, &child);
        f.written.set(0);
        render(&cache, &f, &parent);
        render(&cache, &f, &child);
        assert_eq!(f.written.get(), 2, "each only its last message");
    }
}
