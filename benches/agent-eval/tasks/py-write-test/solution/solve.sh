cat > test_stack.py <<'PY'
import unittest

from stack import Stack


class StackTest(unittest.TestCase):
    def test_push_pop_is_lifo(self):
        s = Stack()
        s.push(1)
        s.push(2)
        self.assertEqual(s.pop(), 2)
        self.assertEqual(s.pop(), 1)

    def test_peek_keeps_the_item(self):
        s = Stack()
        s.push("a")
        s.push("b")
        self.assertEqual(s.peek(), "b")
        self.assertEqual(len(s), 2)

    def test_pop_empty(self):
        with self.assertRaises(IndexError):
            Stack().pop()


if __name__ == "__main__":
    unittest.main()
PY
