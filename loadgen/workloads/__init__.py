"""Workloads: datasets, request streams, random and shared-prefix prompts, sessions, arrival schedules."""
