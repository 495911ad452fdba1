"""What the engine's door hands the API once a model is loaded: the engine contract beside the model's prompts,
pooled outputs, saved cells and facts (ServedModel)."""
