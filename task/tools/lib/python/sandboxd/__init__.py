"""sandboxd's library inside the sandbox: `from sandboxd import tools`."""
