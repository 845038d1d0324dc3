use fizz::fizzbuzz;

#[test]
fn words() {
    let got: Vec<String> = (1..=15).map(fizzbuzz).collect();
    let want = ["1", "2", "Fizz", "4", "Buzz", "Fizz", "7", "8", "Fizz", "Buzz", "11", "Fizz",
                "13", "14", "FizzBuzz"];
    assert_eq!(got, want);
    assert_eq!(fizzbuzz(30), "FizzBuzz");
}
