"""A simulated GPU fleet served over real SSH, for the demo, the tests and the benchmarks.

`model` is the fleet itself (pure: no I/O, time is passed in) and `gpus`, `host`,
`probe_output`, `violation_scripts`, `job_scripts` and `shell` what it imitates; `server`
serves it over SSH (one port per host), `control` scripts it over HTTP, `cli` is `warden sim`.
"""
