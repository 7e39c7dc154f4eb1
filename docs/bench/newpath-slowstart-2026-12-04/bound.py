#!/usr/bin/env python3
"""Lossless slow start from N x 10 segments, doubling per round trip: when 128 MiB is at the
receiver across 100 ms / 965 Mbit/s of payload, counted as the lab counts (2 RTT of setup,
then the data, the last byte RTT/2 after it leaves), and auto/limit for it."""
RTT, RATE, MSS, SIZE = 0.1, 965e6 / 8, 1448, 128 << 20
limit = 2 * RTT + SIZE / RATE + RTT / 2
print(f"physical limit {limit:.3f} s")
for n in (8, 16, 32, 64):
    sent, w, t = 0, n * 10 * MSS, 0.0
    per_rtt = RATE * RTT
    while sent + min(w, per_rtt) < SIZE and w < per_rtt:
        sent += w; w *= 2; t += RTT
    t += (SIZE - sent) / RATE
    total = 2 * RTT + t + RTT / 2
    print(f"{n:3d} streams: {total:.3f} s, auto/limit {limit / total:.3f}")
