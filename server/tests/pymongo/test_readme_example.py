"""The README's pymongo example (readme_example.py) runs against the test server and prints
what it should."""

import os
import subprocess
import sys
import unittest

from harness import HERE, REPO_ROOT, ServerTestCase

EXAMPLE = os.path.join(HERE, "readme_example.py")

EXPECTED = """\
2021-05-18 00:00:00 10
2021-05-18 08:00:00 12
2021-05-18 16:00:00 14
sensor 5578: average 15.0
sensor 5579: average 16.0
"""


class ReadmeExampleTest(ServerTestCase):
    def test_example_is_short_and_in_the_readme(self):
        with open(EXAMPLE) as f:
            lines = f.read().splitlines()
        self.assertLessEqual(len(lines), 25)
        with open(os.path.join(REPO_ROOT, "README.md")) as f:
            readme = f.read()
        # Everything after the file's first comment line, verbatim, as a python block.
        self.assertIn("```python\n" + "\n".join(lines[1:]) + "\n```", readme)

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
