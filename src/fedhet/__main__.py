"""``python -m fedhet ...`` runs the fedhet command line."""

from fedhet.cli import main

if __name__ == "__main__":
    main()
