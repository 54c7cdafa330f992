def main() -> None:  # placeholder replaced below
    pass
