"""Whole-system tests: start real ``millrace`` processes, talk to them, kill them."""
