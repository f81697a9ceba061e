"""PostgreSQL through a small per-process connection pool: the database backend of worker
processes (`ENGINE = "geo_collect.pgpool"`, set by settings.py for Celery workers).

A worker runs one thread per request in flight, and most of a thread's time is spent waiting on
an upstream. With a connection per thread, two workers of 80 threads need 160 PostgreSQL
sessions, idle nearly all the time. Here a thread holds a connection only while it talks to the
database: Django's `connection.close()` gives it back to the pool (the step code does so before
every upstream call, `pipeline.execution`), and the next query takes one, waiting if all are out.

Django 5.1+ pools with psycopg_pool when `OPTIONS["pool"]` is set; this backend keeps Django's
code path and supplies the pool itself (`ConnectionPool` below implements the four methods
Django calls), so the dependency is not needed.
"""
