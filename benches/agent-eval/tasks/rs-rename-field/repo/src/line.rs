/// One line of an order.
#[derive(Debug, Clone)]
pub struct Line {
    pub item: String,
    pub qty: u32,
    pub unit_cents: u64,
}

impl Line {
    pub fn new(item: &str, qty: u32, unit_cents: u64) -> Line {
        Line { item: item.to_string(), qty, unit_cents }
    }
}
