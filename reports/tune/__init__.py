"""Rendering a tune run (and its verify result): loaders, input checks, frames, text, Markdown, CSV, HTML."""
