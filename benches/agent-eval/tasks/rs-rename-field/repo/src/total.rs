use crate::line::Line;

/// The order's total in cents.
pub fn total_cents(lines: &[Line]) -> u64 {
    lines.iter().map(|l| l.qty as u64 * l.unit_cents).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total() {
        let lines = [Line::new("pen", 3, 150), Line::new("pad", 1, 400)];
        assert_eq!(lines[0].qty, 3);
        assert_eq!(total_cents(&lines), 850);
    }
}
