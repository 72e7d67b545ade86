"""Remote storage backends: a local directory (the embedded default) and S3 through obstore."""
