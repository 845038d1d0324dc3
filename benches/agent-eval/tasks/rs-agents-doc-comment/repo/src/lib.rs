/// Whether `value` is a valid percentage.
pub fn is_percent(value: i32) -> bool {
    (0..=100).contains(&value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        assert!(is_percent(0) && is_percent(100) && !is_percent(101));
    }
}
