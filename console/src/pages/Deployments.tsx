import { PageHeader } from '../ui';

export function Deployments() {
  return <PageHeader title="Deployments" />;
}
