"""Command-line interface: parses arguments and routes; no logic lives here."""
