//! [`impl_store!`]: a backend store (its pool and statements, with the database's mark,
//! [`super::exec_mark::MarkOps`]) made a [`super::driver::Driver`] and an
//! [`crate::store::OutboxStore`] by the operations written once: `migrate` ([`super::schema`]),
//! partition ownership and reads ([`super::exec_partitions`]), the mark, and the rest
//! ([`super::exec`]).

/// Implements [`super::driver::Driver`] and [`crate::store::OutboxStore`] for a store of
/// fields `pool` and `statements` on sqlx database `$db`: `impl_store!(SqliteStore, Sqlite);`.
macro_rules! impl_store {
    ($store:ty, $db:ty) => {
        impl $crate::store::driver::Driver for $store {
            type Db = $db;

            fn pool(&self) -> &sqlx::Pool<$db> {
                &self.pool
            }

            fn statements(&self) -> &$crate::store::statement::rows::Statements {
                &self.statements
            }
        }

        #[async_trait::async_trait]
        impl $crate::store::OutboxStore for $store {
            fn backend(&self) -> $crate::store::Backend {
                $crate::store::driver::Driver::statements(self).backend()
            }

            fn table(&self) -> &$crate::store::TableName {
                $crate::store::driver::Driver::statements(self).table()
            }

            async fn migrate(&self) -> Result<Vec<i64>, $crate::store::StoreError> {
                $crate::store::schema::migrate(self).await
            }

            fn partitions(&self) -> u32 {
                $crate::store::driver::Driver::statements(self).partitions()
            }

            async fn repartition(
                &self,
                partitions: u32,
            ) -> Result<$crate::store::Repartition, $crate::store::StoreError> {
                $crate::store::schema::repartition(self, partitions).await
            }

            async fn enqueue(
                &self,
                records: &[$crate::record::Record],
            ) -> Result<u64, $crate::store::StoreError> {
                $crate::store::exec::enqueue(self, records).await
            }

            async fn rebalance(
                &self,
                params: &$crate::store::RebalanceParams<'_>,
            ) -> Result<$crate::store::Ownership, $crate::store::StoreError> {
                $crate::store::exec_partitions::rebalance(self, params).await
            }

            async fn read_partitions(
                &self,
                read: &$crate::store::PartitionRead,
            ) -> Result<$crate::store::ClaimBatch, $crate::store::StoreError> {
                $crate::store::exec_partitions::read_partitions(self, read).await
            }

            async fn live_partitions(
                &self,
                app_code: &str,
            ) -> Result<Option<Vec<u32>>, $crate::store::StoreError> {
                $crate::store::exec_partitions::live_partitions(self, app_code).await
            }

            async fn set_careful(
                &self,
                owner: (&str, &str),
                fence: &$crate::store::PartitionFence,
                careful: &$crate::store::Careful,
            ) -> Result<bool, $crate::store::StoreError> {
                $crate::store::exec_partitions::set_careful(self, owner, fence, careful).await
            }

            async fn reject(
                &self,
                owner: (&str, &str),
                fence: &$crate::store::PartitionFence,
                now_ms: i64,
                rows: &[$crate::store::RejectedRow],
            ) -> Result<u64, $crate::store::StoreError> {
                $crate::store::exec_partitions::reject(self, owner, fence, now_ms, rows).await
            }

            async fn mark(
                &self,
                params: &$crate::store::MarkParams<'_>,
            ) -> Result<$crate::store::MarkReport, $crate::store::StoreError> {
                $crate::store::exec_mark::mark(self, params).await
            }

            async fn counts(
                &self,
                params: &$crate::store::CountsParams,
            ) -> Result<$crate::store::StatusCounts, $crate::store::StoreError> {
                $crate::store::exec::counts(self, params).await
            }

            async fn clock_ms(&self) -> Result<Option<i64>, $crate::store::StoreError> {
                $crate::store::exec::clock_ms(self).await
            }

            async fn list_failed(
                &self,
                params: &$crate::store::ListFailedParams,
            ) -> Result<Vec<$crate::store::FailedRow>, $crate::store::StoreError> {
                $crate::store::exec::list_failed(self, params).await
            }

            async fn requeue(
                &self,
                params: &$crate::store::RequeueParams,
            ) -> Result<u64, $crate::store::StoreError> {
                $crate::store::exec::requeue(self, params).await
            }

            async fn purge(
                &self,
                params: &$crate::store::PurgeParams,
            ) -> Result<u64, $crate::store::StoreError> {
                $crate::store::exec::purge(self, params).await
            }

            async fn search_events(
                &self,
                query: &$crate::store::EventQuery,
            ) -> Result<$crate::store::EventPage, $crate::store::StoreError> {
                $crate::store::exec_browse::search_events(self, query).await
            }

            async fn event(
                &self,
                app_code: &str,
                event_id: &str,
            ) -> Result<Option<$crate::store::EventDetail>, $crate::store::StoreError> {
                $crate::store::exec_browse::event(self, app_code, event_id).await
            }

            async fn error_groups(
                &self,
                params: &$crate::store::ErrorGroupsParams,
            ) -> Result<Vec<$crate::store::ErrorGroup>, $crate::store::StoreError> {
                $crate::store::exec_browse::error_groups(self, params).await
            }

            async fn delete_failed(
                &self,
                params: &$crate::store::DeleteFailedParams,
            ) -> Result<u64, $crate::store::StoreError> {
                $crate::store::exec_browse::delete_failed(self, params).await
            }

            async fn close(&self) {
                $crate::store::driver::Driver::pool(self).close().await
            }
        }
    };
}
pub(crate) use impl_store;
