"""What is tested: cases (model, YAML loading, canonical hash), the suite config and run
manifest."""
