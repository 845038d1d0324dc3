import unittest

from roman import to_roman


class ToRoman(unittest.TestCase):
    def test_values(self):
        for n, want in [(1, "I"), (4, "IV"), (9, "IX"), (14, "XIV"), (40, "XL"),
                        (90, "XC"), (400, "CD"), (1994, "MCMXCIV"), (3999, "MMMCMXCIX")]:
            self.assertEqual(to_roman(n), want)


if __name__ == "__main__":
    unittest.main()
