"""The installed vLLM's own backend classes, driven the way its model runner drives them."""
