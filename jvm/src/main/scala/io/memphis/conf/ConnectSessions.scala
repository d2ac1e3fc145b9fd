package io.memphis.conf

import java.util.{Collections, WeakHashMap}

import scala.util.control.NonFatal

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.memphis.SparkShimImpl

/**
 * What memphis reads of a Spark Connect server running in this JVM. Spark Connect serves many
 * users from one driver, each session in its own SparkSession, without the Hadoop user or the
 * Thrift server's per-statement user that tell users apart elsewhere: its session manager alone
 * knows whose a session is (by the SparkSession's `sessionUUID`, Connect's server-side session id).
 *
 * Read by reflection: spark-connect is not on memphis's compile classpath (Spark 3.5 ships it as a
 * separate package), and a classic application has no Connect service. Where the service runs but
 * cannot say whose a session is (another Spark line's internals), the session is its own scope, so
 * that nothing is shared rather than something leaked.
 */
object ConnectSessions {
  private val ServiceClass = "org.apache.spark.sql.connect.service.SparkConnectService$"
  private val ClosedEvent = "org.apache.spark.sql.connect.service.SparkListenerConnectSessionClosed"

  /** The Connect service object, when its class is on the classpath (read once). */
  private lazy val service: Option[AnyRef] = try {
    val cls = Class.forName(ServiceClass, false, Thread.currentThread().getContextClassLoader)
    Some(cls.getField("MODULE$").get(null))
  } catch {
    case NonFatal(_) | _: LinkageError => None
  }

  /** Users of the sessions already looked up; weak, so a closed session's SparkSession can go. */
  private val known = Collections.synchronizedMap(new WeakHashMap[SparkSession, String]())

  private def call(target: AnyRef, method: String): AnyRef = target.getClass.getMethod(method).invoke(target)

  /** Whether a Spark Connect server runs in this JVM (Spark 3.5 has no `started`: its gRPC server is set). */
  def serving: Boolean = service.exists { s =>
    try call(s, "started") == java.lang.Boolean.TRUE
    catch { case NonFatal(_) => try call(s, "server") != null catch { case NonFatal(_) => false } }
  }

  /** The active Connect sessions: (user id, session id, server-side session id). */
  def active: Seq[(String, String, String)] = service.toSeq.flatMap { s =>
    try {
      call(call(s, "sessionManager"), "listActiveSessions").asInstanceOf[scala.collection.Iterable[AnyRef]].toSeq
        .map(info => (call(info, "userId").toString, call(info, "sessionId").toString, call(info, "serverSessionId").toString))
    } catch {
      case NonFatal(e) =>
        CacheStats.log.debug(s"memphis: could not list Spark Connect's sessions: $e")
        Nil
    }
  }

  /** (user id, session id) of a Spark Connect session's close event; None for any other event. */
  def closedSession(event: AnyRef): Option[(String, String)] =
    if (event.getClass.getName != ClosedEvent) None
    else Some(call(event, "userId").toString -> call(event, "sessionId").toString)

  /** The user whose Connect session `session` is; None for a session Spark Connect does not serve. */
  def userOf(session: SparkSession): Option[String] =
    if (!serving) None
    else Option(known.get(session)).orElse {
      val user = active.collectFirst { case (u, _, server) if server == SparkShimImpl.sessionId(session) => u }
        .getOrElse(s"connect-session:${SparkShimImpl.sessionId(session)}")
      known.put(session, user)
      Some(user)
    }

  /** Whose query a query of `session` is: its Connect user, else the Hadoop or Thrift user of this thread. */
  def userOfQuery(session: SparkSession): String = userOf(session).getOrElse(SparkShimImpl.currentUser)
}
