import unittest

from scores import parse_scores


class ParseScores(unittest.TestCase):
    def test_plain(self):
        self.assertEqual(parse_scores("ann,3\nbob,5\n"), {"ann": 3, "bob": 5})

    def test_empty_score(self):
        self.assertEqual(parse_scores("ann,3\nbob,\n"), {"ann": 3, "bob": 0})


if __name__ == "__main__":
    unittest.main()
