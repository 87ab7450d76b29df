import { PageHeader } from '../ui';

export function UsageExplorer() {
  return <PageHeader title="UsageExplorer" />;
}
