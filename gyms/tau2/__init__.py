"""tau2-bench in mua: retail, airline and telecom customer-service domains (see README.md)."""
