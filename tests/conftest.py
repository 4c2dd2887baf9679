from tests.dev_process import dev  # noqa: F401  (the `dev` fixture for every test package)
