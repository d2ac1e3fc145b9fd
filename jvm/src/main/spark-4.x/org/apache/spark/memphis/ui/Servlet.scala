package org.apache.spark.memphis.ui

/** The servlet API Spark 4's UI is written against (jakarta), for the memphis page's signature. */
object Servlet {
  type Request = jakarta.servlet.http.HttpServletRequest
}
