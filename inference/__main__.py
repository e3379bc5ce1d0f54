"""``python -m inference list`` / ``python -m inference fit <model> --method svi|nuts|stein [...]``."""
from inference.runner import main

if __name__ == "__main__":
    main()
