"""The Goose Gradio app: explore one run's trees, race the methods, replay saved traces."""
