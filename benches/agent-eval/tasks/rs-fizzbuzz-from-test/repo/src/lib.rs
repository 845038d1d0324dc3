pub fn fizzbuzz(n: u32) -> String {
    unimplemented!()
}

#[cfg(test)]
mod tests {
    use super::fizzbuzz;

    #[test]
    fn words() {
        assert_eq!(fizzbuzz(1), "1");
        assert_eq!(fizzbuzz(3), "Fizz");
        assert_eq!(fizzbuzz(5), "Buzz");
        assert_eq!(fizzbuzz(15), "FizzBuzz");
    }
}
