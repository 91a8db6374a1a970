"""`attnsel preflight`: the checks of one deployment, on one host or over a Ray cluster."""
