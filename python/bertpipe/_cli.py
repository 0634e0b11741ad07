"""The `bertpipe` command of the wheel: the same command line as the Cargo-built binary (one
Rust function, `bertpipe::app::run`), called through the native module."""

import sys


def main() -> None:
    from bertpipe import _native

    sys.exit(_native.run_cli(["bertpipe", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
