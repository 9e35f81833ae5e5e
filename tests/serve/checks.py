"""What the serve test clients share: counting checks, and the openai
client, whose absence is a clear error rather than a traceback."""

import sys


class Checks:
    """`check(name, ok, detail)` counts a check and reports a failure;
    `check.finish()` prints `N passed, N failed` and exits 1 on any
    failure. With `show_passes`, passes print too, all on stdout."""

    def __init__(self, show_passes=False):
        self.passed = 0
        self.failed = 0
        self.show_passes = show_passes

    def __call__(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            if self.show_passes:
                print(f"ok   {name}: {detail}")
        else:
            self.failed += 1
            print(f"FAIL {name}: {detail}", file=sys.stdout if self.show_passes else sys.stderr)

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)


def require_openai(script):
    """The openai package, or an exit that says how to install it."""
    try:
        import openai
    except ImportError:
        sys.exit(f"{script} needs the openai package: pip install -r scripts/requirements-test.txt")
    return openai


def openai_client(openai, base_url, timeout=120):
    """A client of `smelt serve` at `base_url`: no retries, so a failure
    shows at once."""
    return openai.OpenAI(base_url=base_url + "/v1", api_key="unused", timeout=timeout, max_retries=0)
