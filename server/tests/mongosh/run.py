"""Runs smoke.js with mongosh against a `tsbucket serve` started for it.

    python server/tests/mongosh/run.py PATH/TO/mongosh

Uses the pymongo suite's harness (and so its venv) to start and stop the server.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pymongo"))
from harness import Server  # noqa: E402


def main():
    mongosh = sys.argv[1]
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "smoke.js")
    server = Server()
    server.start()
    try:
        r = subprocess.run(
            [mongosh, "--quiet", f"mongodb://127.0.0.1:{server.port}", script],
            capture_output=True, text=True, timeout=120,
        )
    finally:
        server.stop()
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    if r.returncode != 0 or "all checks passed" not in r.stdout:
        print(f"mongosh exited with {r.returncode}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
