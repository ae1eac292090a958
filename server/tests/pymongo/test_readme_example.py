"""The README's pymongo example (readme_example.py) runs against the test server and prints
what it should."""

import os
import subprocess
import sys
import unittest

from harness import HERE, ServerTestCase

EXAMPLE = os.path.join(HERE, "readme_example.py")

EXPECTED = """\
2021-05-18 00:00:00 10
2021-05-18 08:00:00 12
2021-05-18 16:00:00 14
sensor 5578: average 15.0
sensor 5579: average 16.0
"""


class ReadmeExampleTest(ServerTestCase):
    def test_example_is_short(self):
        with open(EXAMPLE) as f:
            self.assertLessEqual(len(f.read().splitlines()), 25)

    def test_example_runs(self):
        env = dict(os.environ, MONGODB_URI=self.server.uri)
        for run in range(2):  # a second run starts over (it drops the collection first)
            with self.subTest(run=run):
                r = subprocess.run([sys.executable, EXAMPLE], capture_output=True, text=True, env=env, timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout, EXPECTED)
        self.assertEqual(self.client.example.weather.count_documents({}), 12)


if __name__ == "__main__":
    unittest.main()
