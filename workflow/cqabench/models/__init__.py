"""The models stage: fetched Hugging Face checkpoints, where they live and how an offline job finds them."""
