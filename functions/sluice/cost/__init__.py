"""What a deployment costs per million predictions on each runtime it could use, from its
measured latency and a dated price file per region (`prices/<region>.json`)."""
