import unittest

from duration import parse_duration


class ParseDuration(unittest.TestCase):
    def test_units(self):
        self.assertEqual(parse_duration("45s"), 45)
        self.assertEqual(parse_duration("2m"), 120)
        self.assertEqual(parse_duration("1h"), 3600)

    def test_combined(self):
        self.assertEqual(parse_duration("1h30m"), 5400)
        self.assertEqual(parse_duration("1m5s"), 65)

    def test_invalid(self):
        with self.assertRaises(ValueError):
            parse_duration("ten minutes")


if __name__ == "__main__":
    unittest.main()
