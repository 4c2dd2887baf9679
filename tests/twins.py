"""What a call gave, comparable across a compiled function and its pure twin."""


def outcome(fn, *args):
    """("ok", result) or ("error", the error's type, its text)."""
    try:
        return "ok", fn(*args)
    except Exception as e:  # noqa: BLE001 - the point is to compare any error
        return "error", type(e), str(e)
