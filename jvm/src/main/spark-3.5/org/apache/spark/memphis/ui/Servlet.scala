package org.apache.spark.memphis.ui

/** The servlet API Spark 3.5's UI is written against (javax), for the memphis page's signature. */
object Servlet {
  type Request = javax.servlet.http.HttpServletRequest
}
