#!/usr/bin/env python3
"""Writes config/holidays.txt, the built-in holiday calendars of
[send_window] (docs/send-window.md), from python-holidays
(https://github.com/vacanza/holidays), the maintained source:

    pip install 'holidays==0.109' && scripts/holiday_calendars.py > config/holidays.txt

One line per calendar and year: the calendar's name (ISO 3166-1 country,
or country-subdivision as in ISO 3166-2), the year, and each public
holiday's month and day. Run it again with a newer release to update the
data; the header names the release it came from."""

import holidays

COUNTRIES = ["DE", "AT", "CH", "FR", "GB", "IE", "NL", "BE", "ES", "IT", "US", "CA", "AU", "NZ"]
# Countries whose subdivisions (states, nations, cantons, provinces) get
# calendars of their own.
WITH_SUBDIVISIONS = {"DE", "AT", "CH", "GB", "ES", "US", "CA", "AU"}
YEARS = range(2020, 2041)


def subdivisions(country):
    if country not in WITH_SUBDIVISIONS:
        return []
    # ISO 3166-2 codes only (python-holidays also knows a few cities).
    return [s for s in holidays.country_holidays(country).subdivisions
            if s.isdigit() or (s.isupper() and len(s) <= 3)]


def main():
    print(f"# Public holidays {YEARS[0]}-{YEARS[-1]} from python-holidays {holidays.__version__}")
    print("# (https://github.com/vacanza/holidays), written by scripts/holiday_calendars.py; do not edit.")
    print("# <calendar> <year> <MMDD>...")
    for country in COUNTRIES:
        for sub in [None] + subdivisions(country):
            name = country if sub is None else f"{country}-{sub}"
            days = holidays.country_holidays(country, subdiv=sub, years=YEARS)
            for year in YEARS:
                dates = sorted(d for d in days if d.year == year)
                print(f"{name} {year} " + " ".join(d.strftime("%m%d") for d in dates))


if __name__ == "__main__":
    main()
