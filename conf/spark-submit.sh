#!/usr/bin/env bash
# spark-submit with memphis by hand (what `memphis submit` does): ./conf/spark-submit.sh job.py [args]
set -euo pipefail
JAR=$(python -c 'import memphis; print(memphis.jar_path())')
exec spark-submit --jars "$JAR" --conf spark.sql.extensions=io.memphis.MemphisSparkSessionExtension "$@"
