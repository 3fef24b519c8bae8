"""The HTTPS API: one FastAPI app, served by uvicorn locally and by Mangum in Lambda."""
