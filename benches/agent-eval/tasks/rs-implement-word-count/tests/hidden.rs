use words::word_counts;

#[test]
fn counts() {
    let c = word_counts("Hello, hello world! -- World");
    assert_eq!(c.get("hello"), Some(&2));
    assert_eq!(c.get("world"), Some(&2));
    assert_eq!(c.len(), 2);
    assert!(word_counts("  ").is_empty());
}
