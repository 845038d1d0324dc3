import unittest

from mathx import total_upto


class TotalUpto(unittest.TestCase):
    def test_small(self):
        self.assertEqual(total_upto(3), 6)

    def test_zero(self):
        self.assertEqual(total_upto(0), 0)


if __name__ == "__main__":
    unittest.main()
