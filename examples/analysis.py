"""Example analysis: which region grew fastest in 2024? Runs inside the sandbox.

sbx exec examples/analysis.py --data examples/sales.csv --output out/
"""

import matplotlib.pyplot as plt
import pandas as pd

sales = pd.read_csv("/data/sales.csv")
by_year = sales.pivot_table(index="region", columns="year", values="revenue", aggfunc="sum")
by_year["growth_%"] = (by_year[2024] / by_year[2023] - 1) * 100
by_year = by_year.sort_values("growth_%", ascending=False)

print("Revenue by region (sum over all products and quarters):")
print(by_year.round(1).to_string())
leader = by_year.index[0]
growth = by_year.loc[leader, "growth_%"]
print(f"\nFastest-growing region in 2024: {leader} ({growth:+.1f}% vs 2023)")

quarterly = sales.pivot_table(index="period", columns="region", values="revenue", aggfunc="sum")
ax = quarterly.plot(marker="o", figsize=(8, 4.5), title="Quarterly revenue by region")
ax.set_xlabel("quarter")
ax.set_ylabel("revenue")
plt.tight_layout()
plt.savefig("/output/revenue_by_region.png", dpi=120)
print("Plot saved to /output/revenue_by_region.png")
