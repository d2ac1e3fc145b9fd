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
 *
 * A client that sends no user id (pyspark sends `$SPARK_USER`, else `$USER`, when the connection
 * names none: a container without either sends none) is unknown too: every such client has the user
 * id "", so filing them under it would share one user's entries, in memory and in the durable tier,
 * among strangers. Its session is its own scope instead ([[sessionScope]]), which keeps reuse
 * within the session: whoever can send its session id is already in that SparkSession, with its
 * temporary views and caches, so memphis shows them nothing Spark does not. An unknown user's scope
 * gets no durable entries ([[unknown]]): it ends with its session, and a later process cannot be
 * told it is the same client.
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

  /** (user or session scope, session id) of a Spark Connect session's close event; None for any other event. */
  def closedSession(event: AnyRef): Option[(String, String)] =
    if (event.getClass.getName != ClosedEvent) None
    else {
      val session = call(event, "sessionId").toString
      Some(named(call(event, "userId").toString, session) -> session)
    }

  /** What the scope of a session of an unknown user starts with. */
  private val SessionScopePrefix = "connect-session:"

  /** The scope of the Connect session `sessionId` when its user is not known: that session's alone. */
  private def sessionScope(sessionId: String): String = SessionScopePrefix + sessionId

  /**
   * Whether `user` is a session's scope rather than a user Connect named: no durable entries are
   * read or written for it. A user id of this form that a client sends itself is treated alike
   * (no durable entries; in memory it shares only with a session whose random id it names).
   */
  def unknown(user: String): Boolean = user.startsWith(SessionScopePrefix)

  /**
   * The user whose Connect session `session` is, or the session's own scope when it sent no user id
   * or Connect cannot say; None for a session Spark Connect does not serve.
   */
  def userOf(session: SparkSession): Option[String] =
    if (!serving) None
    else Option(known.get(session)).orElse {
      val user = active.collectFirst { case (u, s, server) if server == SparkShimImpl.sessionId(session) => named(u, s) }
        .getOrElse(sessionScope(SparkShimImpl.sessionId(session)))
      known.put(session, user)
      Some(user)
    }

  /** The scope of Connect's user id `user` in session `sessionId`: the user, or the session's own scope when it sent none. */
  private def named(user: String, sessionId: String): String = if (user.isEmpty) sessionScope(sessionId) else user

  /** Whose query a query of `session` is: its Connect user, else the Hadoop or Thrift user of this thread. */
  def userOfQuery(session: SparkSession): String = userOf(session).getOrElse(SparkShimImpl.currentUser)
}
