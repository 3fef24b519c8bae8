"""Model monitoring: profiles of what a deployment is sent and answers (`sketches`), kept for
the traffic each process serves (`profiler`), compared with a baseline (`checks`) and read
back per window (`report`)."""
