use pct::clamp_percent;

#[test]
fn clamps() {
    assert_eq!(clamp_percent(-5), 0);
    assert_eq!(clamp_percent(42), 42);
    assert_eq!(clamp_percent(250), 100);
}
