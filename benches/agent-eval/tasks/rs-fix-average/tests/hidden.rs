use stats::average;

#[test]
fn means() {
    assert_eq!(average(&[]), None);
    assert_eq!(average(&[1, 2]), Some(1.5));
    assert_eq!(average(&[-3, 4]), Some(0.5));
    assert_eq!(average(&[7]), Some(7.0));
}
