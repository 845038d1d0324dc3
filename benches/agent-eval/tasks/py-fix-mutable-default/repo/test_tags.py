import unittest

from tags import add_tag


class AddTag(unittest.TestCase):
    def test_fresh_list_each_call(self):
        self.assertEqual(add_tag("a"), ["a"])
        self.assertEqual(add_tag("b"), ["b"])

    def test_given_list(self):
        self.assertEqual(add_tag("y", ["x"]), ["x", "y"])


if __name__ == "__main__":
    unittest.main()
