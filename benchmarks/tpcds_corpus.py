"""TPC-DS' 99 queries on DuckDB-generated data as a notebook session (first, again, edited), asked by
plain Spark and by memphis in one fresh JVM.

    python benchmarks/tpcds_corpus.py --sf 0.05 --driver-memory 1g --out /tmp/tpcds_corpus.json

tpch_corpus.py run over TPC-DS: its 24 tables from DuckDB's dsdgen (the duckdb-extension-tpcds package
carries the extension, loaded by path: nothing is downloaded) as Parquet under build/tpcds/sf<SF>,
generated once per scale and then reused; its queries DuckDB's ``tpcds_queries()`` with their LIMITs
dropped, so that every answer can be compared as a multiset, and their double-quoted aliases in
backticks. So written, Spark 4.2 parses and runs all 99. The passes, the edits, the samples, the
report and the exit status are tpch_corpus.py's.

The default scale, 0.05, answers 80 of the queries with rows (0.01: 72) in about the time 0.01 takes:
a query's time here is Spark's planning and scheduling more than its data (each pass takes about a
minute and a half on 2 busy cores, the re-run with memphis a tenth of that).
"""
import sys

from tpch_corpus import Corpus, main

TPCDS = Corpus("TPC-DS", "tpcds", "dsdgen",
               ("call_center", "catalog_page", "catalog_returns", "catalog_sales", "customer", "customer_address",
                "customer_demographics", "date_dim", "household_demographics", "income_band", "inventory", "item",
                "promotion", "reason", "ship_mode", "store", "store_returns", "store_sales", "time_dim", "warehouse",
                "web_page", "web_returns", "web_sales", "web_site"), 99,
               # all but these 15 end in LIMIT 100
               {n: 100 for n in range(1, 100)
                if n not in (2, 9, 13, 24, 31, 34, 39, 48, 64, 71, 73, 87, 88, 91, 98)})

if __name__ == "__main__":
    sys.exit(main(corpus=TPCDS, description=__doc__, sf=0.05))
