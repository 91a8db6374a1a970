"""`attnsel tune` end to end: the request, the result document, rows, the recommendation, a saved run read back."""
