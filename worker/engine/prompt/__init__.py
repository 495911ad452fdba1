"""What a request's prompt is made of before it is tokenized: the model's chat template."""
