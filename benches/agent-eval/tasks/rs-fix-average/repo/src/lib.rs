/// The mean of `values`, or `None` when there are none.
pub fn average(values: &[i64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let sum: i64 = values.iter().sum();
    Some((sum / values.len() as i64) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty() {
        assert_eq!(average(&[]), None);
    }

    #[test]
    fn halves() {
        assert_eq!(average(&[1, 2]), Some(1.5));
    }
}
