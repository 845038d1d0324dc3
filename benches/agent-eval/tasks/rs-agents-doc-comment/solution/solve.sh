cat > src/lib.rs <<'RS'
/// Whether `value` is a valid percentage.
pub fn is_percent(value: i32) -> bool {
    (0..=100).contains(&value)
}

/// `value` limited to 0..=100.
pub fn clamp_percent(value: i32) -> u8 {
    value.clamp(0, 100) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        assert!(is_percent(0) && is_percent(100) && !is_percent(101));
    }

    #[test]
    fn clamps() {
        assert_eq!(clamp_percent(-1), 0);
        assert_eq!(clamp_percent(101), 100);
    }
}
RS
