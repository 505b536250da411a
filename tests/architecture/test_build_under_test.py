"""Guards that the suite exercises the build it claims to (scripts/test.sh runs it twice)."""
import os

import pecore._native


def test_sanitizer_build_is_the_one_loaded():
    """Under PE_EXPECT_SANITIZED the extension must come from the ASan/UBSan build, or that run proves nothing."""
    path = pecore._native.__file__
    if os.environ.get("PE_EXPECT_SANITIZED"):
        assert "py-asan" in path, path
    else:
        assert "py-asan" not in path, path
