use orders::{total_cents, Line};

#[test]
fn renamed() {
    let line = Line { item: "pen".to_string(), quantity: 2, unit_cents: 5 };
    assert_eq!(line.quantity, 2);
    assert_eq!(total_cents(&[line, Line::new("x", 3, 1)]), 13);
}
